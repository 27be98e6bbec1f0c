"$MPRESS" profile --model gpt-tiny --import pipedream x.txt
